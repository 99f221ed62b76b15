#!/usr/bin/env bash
# From a fresh Debian bookworm machine to a trained model: installs the packages, configures,
# builds the library, examples/hello_autograd and examples/train_mlm, runs hello_autograd, then
# pretrains a small Linformer masked-language model on the fortunes corpus (a few minutes).
#
#   bash examples/quickstart.sh     (build directory: build/, or $TINYFORMER_BUILD_DIR)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash .ci/install-deps.sh
# train_mlm's default corpus: Debian's fortunes package, about 2.5 MB of English text under
# /usr/share/games/fortunes.
if [[ ! -d /usr/share/games/fortunes ]]; then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends fortunes
fi

build=${TINYFORMER_BUILD_DIR:-build}
# The CUDA backend takes minutes to compile and is of no use without a GPU: build it only where
# the driver sees one (TINYFORMER_CUDA=ON or OFF decides otherwise).
cuda=${TINYFORMER_CUDA:-}
if [[ -z $cuda ]]; then
  cuda=OFF
  if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then cuda=AUTO; fi
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTINYFORMER_CUDA="$cuda"
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target hello_autograd train_mlm
"$build/examples/hello_autograd"
echo
# Its log, plot and checkpoint go to the build folder, beside the programs. Run again, the script
# trains afresh: --overwrite replaces the checkpoint of the last run, which train_mlm otherwise
# refuses to replace (--resume would continue it).
cd "$build"
./examples/train_mlm --log train_mlm.csv --plot train_mlm.png --overwrite
