"""Reports rendered from results.json."""
