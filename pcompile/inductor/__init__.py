"""pcompile under torch.compile: the `pcompile` dynamo backend, install(), and the cache hooks.

backend.py   the dynamo backend (entry point torch_dynamo_backends: pcompile)
install.py   install(): route an unchanged torch.compile(m) through pcompile
autoload.py  PCOMPILE=1 through torch's `torch.backends` plugin autoload
hooks.py     turns the hooks on once per process: the version gate, then the feature registry
features.py  the registry: each feature's compat checks, when it is wanted, install/uninstall,
             what it yields to, and whether it acts at torch.compile or with the hooks
store_gateway.py  every layer's one way to the store (look-up, single-flight, accounting, events)
kernel_router.py  the compile pool's Triton jobs through the gateway; pool_install.py hooks it in
"""
