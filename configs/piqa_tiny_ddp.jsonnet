// The offline demo trained by 2 DDP processes (gloo on CPU, NCCL on GPUs). `batch_size` is
// global and every step sees the same examples, so this is the *same* step as in
// piqa_tiny.jsonnet, with the same cache key: in a workspace where that one ran, nothing trains.
local tiny = import "piqa_tiny.jsonnet";

tiny + { steps+: { finetune+: { device_count: 2 } } }
