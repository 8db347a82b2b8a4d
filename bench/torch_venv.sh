# bench/torch_venv.sh — sourced by the benchmarks that run torch beside
# weft (model_cpu_torch.sh, attention_cpu_torch.sh): makes (once) the
# virtual environment $WEFT_TORCH_VENV (default ~/.cache/weft/venv-torch)
# with the versions pinned in bench/requirements-torch.txt, remade when
# they change, and sets `py` to its python. torch comes from plain PyPI:
# the download is large (the CUDA build with its nvidia-* wheels); only
# its CPU side is used.
torch_venv_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${WEFT_TORCH_VENV:-$HOME/.cache/weft/venv-torch}
req="$torch_venv_here/requirements-torch.txt"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/bench-requirements.txt"; then
    echo "making $venv from $req (torch from PyPI: a large download)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet -r "$req"
    cp "$req" "$venv/bench-requirements.txt"
fi
py="$venv/bin/python"
