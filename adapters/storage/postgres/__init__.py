"""PostgreSQL as the store's engine (COMPANION_DATABASE_URL): imported only when configured, needs the `postgres` extra."""
