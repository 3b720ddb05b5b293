"""Word-level text handling shared by the query path: tokens, stopwords, stems."""
