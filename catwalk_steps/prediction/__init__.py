"""What ``catwalk::predict`` computes: a split's requests and records (:mod:`.plan`, as the task's
request kind makes them, :mod:`..kinds`), computed on several workers, each journaling what it
computed (:mod:`.workers`)."""
