"""Printed-to-PDF web pages (and a TeX manual) against their sources: are the PDF's chunks under
the headings of the sections they come from? See ``make_pdfs.py`` and ``heading_share.py``."""
