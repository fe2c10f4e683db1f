// The core suite (every registered task) zero-shot and 5-shot on the tiny GPT-2, offline: each
// task on local files in its hub format (data/tiny/core: the demo's action-tool pairs asked
// once more per task). One table: accuracies with standard errors, and a macro average per
// shot count. Models fine-tuned elsewhere go beside it as refs (lib.ref("finetune")).
//   tango run configs/core_tiny.jsonnet -w workspace
local lib = import "lib.libsonnet";
local tiny = import "tiny.libsonnet";

{ steps: lib.suite("core", models={ tiny: tiny.models.tiny }, shots=[0, 5], tasks=tiny.core, predict=tiny.predict) }
