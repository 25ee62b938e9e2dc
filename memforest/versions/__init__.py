"""Versions of one user's memory as readers see them: a published snapshot (`snapshot`), the next
version built from the previous one and an operation's ChangeSet (`publish`), and the caches of a
committed version kept beside its database (`caches`)."""
