"""The ground floor's text side: reading corpora, tokenizing with offsets and word boundaries, blocking."""
