"""Engine adapters: the only modules that import tantivy, faiss and rdflib."""
