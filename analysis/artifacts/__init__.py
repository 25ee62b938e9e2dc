"""One module per paper table or figure; each has `make(results, out) -> list[Path]`."""
