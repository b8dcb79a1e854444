import time, os, sys, json
T={}
t=time.perf_counter()
import torch; T["import torch"]=time.perf_counter()-t; t=time.perf_counter()
import torch._inductor.compile_fx; T["import compile_fx"]=time.perf_counter()-t; t=time.perf_counter()
from pcompile.inductor import hooks; T["import hooks"]=time.perf_counter()-t; t=time.perf_counter()
os.environ["PCOMPILE_BACKWARD_AHEAD"]="0"
hooks.install_hooks(); T["install_hooks"]=time.perf_counter()-t; t=time.perf_counter()
import importlib; fingerprint = importlib.import_module("pcompile.keys.fingerprint")
fingerprint.software(); T["software fp"]=time.perf_counter()-t; t=time.perf_counter()
from pcompile.keys import Target
Target.current(); T["Target.current"]=time.perf_counter()-t; t=time.perf_counter()
from pcompile.inductor.layer_keys import layer_fingerprint
for k in ("graph","triton","autotune"):
    layer_fingerprint(k); T["fp "+k]=time.perf_counter()-t; t=time.perf_counter()
from torch._inductor.codecache import CacheBase, torch_key
torch_key(); T["torch_key"]=time.perf_counter()-t; t=time.perf_counter()
CacheBase.get_system(); T["get_system"]=time.perf_counter()-t; t=time.perf_counter()
from pcompile.inductor.compat import backward_graph
backward_graph.prewarm(); T["bg.prewarm rest"]=time.perf_counter()-t; t=time.perf_counter()
print(json.dumps({k:round(v,3) for k,v in T.items()}))
