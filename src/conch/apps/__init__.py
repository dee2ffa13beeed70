"""Applications on the library: the CLI, the HTTP metastore server, the web inspector, pipelines."""
