"""What the chat platforms share: splitting a reply into messages, where a streamed reply is cut, Markdown rendered."""
