"""The plan file: its format and JSON reading (:mod:`.schema`), the document written, loaded and verified
(:mod:`.document`, the fields checked by :mod:`.reading`), and the mechanism each row is executed as, with the rules
every row must follow (:mod:`.mechanism`)."""
