"""What ``catwalk::predict`` computes: a split's requests and records (:mod:`.plan`; by task kind,
:mod:`.choice_records`, :mod:`.generation_records`, :mod:`.perplexity_records`), computed on
several workers, each journaling what it computed (:mod:`.workers`)."""
