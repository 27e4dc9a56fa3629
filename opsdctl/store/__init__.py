"""The store: SQLModel tables, chain states, the engine (SQLite or PostgreSQL), locks, migrations."""
