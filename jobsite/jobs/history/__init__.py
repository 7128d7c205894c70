"""The history in the ORM: the mirror from the event streams, bulk writes, rollups, retention."""
