"""Tools that write the repository's own files: tools.config_docs renders docs/CONFIGURATION.md from the jobs'
config objects (`python -m tools.config_docs --write`)."""
