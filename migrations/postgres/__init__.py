"""The PostgreSQL schema: numbered SQL files, each the twin of the SQLite migration of the same name from 0014 on."""
