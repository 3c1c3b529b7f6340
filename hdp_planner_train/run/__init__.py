"""The run layer the simulator and Flower share: the plan a run reads once (:mod:`.plan`) and the run bound to it
(:mod:`.bound`), its errors and settings (:mod:`.errors`, :mod:`.settings`), noise source (:mod:`.noise`), trust model
(:mod:`.trust`), privacy ledger (:mod:`.ledger`), progress (:mod:`.progress`), metrics (:mod:`.metrics`) and output
folder (:mod:`.output`, :mod:`.plots`), and Ctrl-C held over a ledger charge (:mod:`.interrupts`)."""
