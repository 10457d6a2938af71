#!/usr/bin/env python3
# prom-samples.py FILE: read a Prometheus text exposition with
# prometheus_client's parser (Debian's python3-prometheus-client) and print
# every sample as "name{label=value,...} value" (labels sorted, the value
# as a Python float), after "PROBLEM ..." lines for what breaks ddl's
# conventions: a family without exactly one HELP and TYPE, a name without
# the ddl_ prefix, a counter whose samples do not end in _total, a sample
# without the labels job, step and node.  "ERROR ..." and exit 1 when the
# parser refuses the text.  Used by tests/integration/lib.sh's t_prom_parse.
import sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
try:
    fams = list(text_string_to_metric_families(text))
except Exception as e:
    print("ERROR", e)
    sys.exit(1)
problems = []
helps = [l.split()[2] for l in text.splitlines() if l.startswith("# HELP ")]
types = {l.split()[2]: l.split()[3] for l in text.splitlines() if l.startswith("# TYPE ")}
if len(helps) != len(set(helps)) or set(helps) != set(types):
    problems.append("HELP/TYPE not once per family")
for f in fams:
    if not f.name.startswith("ddl_"):
        problems.append("no ddl_ prefix: " + f.name)
    if f.type == "counter" and types.get(f.name + "_total") != "counter":
        problems.append("counter without _total: " + f.name)
    for s in f.samples:
        for l in ("job", "step", "node"):
            if l not in s.labels:
                problems.append("%s lacks label %s" % (s.name, l))
for p in sorted(set(problems)):
    print("PROBLEM", p)
for f in fams:
    for s in f.samples:
        lab = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
        print("%s{%s} %s" % (s.name, lab, repr(float(s.value))))
