"""pcompile under torch.compile: the `pcompile` dynamo backend, install(), and the cache hooks.

backend.py   the dynamo backend (entry point torch_dynamo_backends: pcompile)
install.py   install(): route an unchanged torch.compile(m) through pcompile
autoload.py  PCOMPILE=1 through torch's `torch.backends` plugin autoload
hooks.py     turns each cache layer on, gated by version and by compat checks (pcompile/compat/)
"""
