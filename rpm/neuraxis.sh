#!/bin/sh
# /usr/bin/neuraxis (neuraxis-common): runs the neuraxis command from the
# environment an RPM installed under /opt/neuraxis. `neuraxis neuron ...`
# prefers the neuron's environment (it has the engine), anything else the
# cortex's (smaller, quicker to start); either serves where only one is
# installed. Paths are taken relative to this script, so that a tree installed
# with `rpm --root DIR` runs as DIR/usr/bin/neuraxis too.
here=$(dirname "$(readlink -f "$0")")
opt="$here/../../opt/neuraxis"
# The Ray cluster's token (the services use it; `neuraxis status` needs it
# too), for whoever may read it: root and the neuraxis group.
token="$here/../../etc/neuraxis/ray-auth-token"
if [ -z "${RAY_AUTH_TOKEN_PATH-}${RAY_AUTH_TOKEN-}" ] && [ -r "$token" ]; then
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token"
fi
case "$1" in
neuron) order="neuron cortex" ;;
*) order="cortex neuron" ;;
esac
for env in $order; do
    if [ -x "$opt/$env/bin/python" ]; then
        # -P: not the working directory first on sys.path (a checkout of
        # neuraxis there would shadow the installed one), as a console script.
        exec "$opt/$env/bin/python" -P -m neuraxis.cli "$@"
    fi
done
echo "neuraxis: no environment under /opt/neuraxis: install neuraxis-cortex or a neuraxis-neuron-<flavour> package" >&2
exit 1
