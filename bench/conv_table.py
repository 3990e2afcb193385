#!/usr/bin/env python3
"""Per-shape table of `bench/gpu.sh convs` output: each MPSRT_CONV_ALGO vs torch (cuDNN), batch 32.

Usage: python3 bench/conv_table.py bench/results/<date>-<device>/<call>/
"""
import json,collections,sys
d=sys.argv[1]
rows=[json.loads(l) for l in open(d+'convs.jsonl') if l.startswith('{')]
torch=[json.loads(l) for l in open(d+'convs_torch.jsonl') if l.startswith('{')]
key=lambda r:(r['n'],r['c'],r['k'],r['r'],r['stride'],r['h'])
t={key(r):r['ms'] for r in torch}
by=collections.defaultdict(dict)
for r in rows:
    if r.get('bench')!='conv2d': continue
    by[key(r)].setdefault(r.get('algo','?'),r['ms'])
algos=list(dict.fromkeys(r.get('algo','?') for r in rows if r.get('bench')=='conv2d'))  # as run (ALGOS)
print('n c k r s h | torch | '+' '.join(algos)+' | best')
tot=collections.Counter()
for k in by:
    if k[0]!=32: continue
    tv=t.get(k)
    best=min((by[k][a],a) for a in algos if a in by[k])
    print(f"{k} | {tv:.3f} | "+' '.join(f"{by[k].get(a,float('nan')):.3f}" for a in algos)+f" | {best[1]} {best[0]/tv:.2f}x")
    for a in algos:
        if a in by[k]: tot[a]+=by[k][a]
    tot['best']+=best[0]
    tot['torch']+=tv or 0
print({k:round(v,3) for k,v in tot.items()})
