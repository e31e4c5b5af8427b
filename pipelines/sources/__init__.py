"""Raw-input sources. A source lists and reads raw items with stable ids; it never parses (parsers do)."""
