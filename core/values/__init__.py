"""Values and text: the dataclasses, errors, fixed sentences and small pure helpers every group uses."""
