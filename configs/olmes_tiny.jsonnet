// OLMES v0.1's core suite on the tiny GPT-2, offline: each core task's cloze (rc) and lettered
// (mc) variant on local files in its dataset's fields (data/tiny/core), 8 docs each. One
// table: per task each variant's primary score, the better of the two, and the macro averages.
//   tango run configs/olmes_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{ steps: lib.olmes({ tiny: tiny.models.tiny }, tasks=tiny.olmes) }
