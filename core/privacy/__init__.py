"""Privacy: the valve between normal and private mode, the passphrase, lockouts and the transition line."""
