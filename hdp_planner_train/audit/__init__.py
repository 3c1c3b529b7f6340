"""The privacy audit of a run: canary clients inserted in the rounds and their empirical ε (:mod:`.canaries`)."""
