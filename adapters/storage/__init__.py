"""Storage adapters: the SQLite store and its migrations runner."""
