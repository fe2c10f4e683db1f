// The helpers ship inside the package (catwalk_steps/configs/lib.libsonnet, in every install);
// this file keeps `import "lib.libsonnet"` working for the configs beside it.
import "../catwalk_steps/configs/lib.libsonnet"
