# shellcheck shell=bash
# Shared by the engines' setup scripts (sourced, not run): progress lines with the
# time taken, stamps naming a step's inputs, and a venv made afresh without ever
# deleting something that is not a venv.
#
#   source "$here/../lib.sh"

export PIP_DISABLE_PIP_VERSION_CHECK=1

started=$SECONDS
step_started=$SECONDS

# `banner TEXT`: a progress line; starts timing a step.
banner() {
    echo "==> [$((SECONDS - started))s] $*"
    step_started=$SECONDS
}

# `done_in WHAT`: the step started by the last banner is done.
done_in() {
    echo "==> [$((SECONDS - started))s] $1 done in $((SECONDS - step_started))s"
}

# `stamp_ok FILE WANT`: FILE exists and holds WANT.
stamp_ok() {
    [[ -f $1 && $(cat "$1") == "$2" ]]
}

# `fresh_venv DIR PYTHON WHY`: removes DIR if it is a venv (saying WHY), refuses if
# it exists and is not one, and creates an empty venv there with PYTHON.
fresh_venv() {
    local dir=$1 python=$2 why=$3
    if [[ -e $dir ]]; then
        if [[ ! -f $dir/pyvenv.cfg ]]; then
            echo "setup.sh: $dir exists and is not a venv; refusing to replace it" >&2
            exit 1
        fi
        banner "venv: $why; removing $dir"
        rm -rf "$dir"
    fi
    banner "venv: creating $dir with $("$python" --version) ($python)"
    "$python" -m venv "$dir"
}
