"""The plan file: its JSON document, read and written and verified (:mod:`.document`), and the mechanism each row
is executed as, with the rules every row must follow (:mod:`.mechanism`)."""
