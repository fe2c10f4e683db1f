// The named suites ship inside the package (catwalk_steps/configs/suites.libsonnet); this file
// keeps `import "suites.libsonnet"` working for the configs beside it.
import "../catwalk_steps/configs/suites.libsonnet"
