# bench: nothing built here yet (see bench/README.md).
