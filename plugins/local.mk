# plugins: nothing built here yet (see plugins/README.md).
