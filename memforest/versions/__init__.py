"""Versions of one user's memory as readers see them: a published snapshot (`snapshot`), the next
version built from the previous one and an operation's ChangeSet (`publish`), the caches of a
committed version kept beside its database (`caches`), the resident snapshots a process holds per user
(`resident_versions`) and committing an operation's changes then publishing them (`committer`)."""
