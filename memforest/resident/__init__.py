"""How a memory is held in memory: the residency wing.

Copy-on-write maps (`cow`), versioned vector tables and their partitions (`vector_table`,
`partitions`), the files of arrays a process maps instead of rebuilding (`cache_file`), reading a
loaded version's records and trees when first needed (`ondemand`), and what a host process may switch
on for a large memory: huge-page advice (`hugepages`) and freezing the collected heap (`heap`), both
off unless the host asks (`MemForestConfig.heap_freeze_nodes`, `huge_pages`).

Nothing here knows the store, the indexes or the operations: the wing imports only the records and
the trees (an import contract in pyproject.toml)."""
