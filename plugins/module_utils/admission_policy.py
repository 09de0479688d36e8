# -*- coding: utf-8 -*-
# Apache-2.0
"""The fractional-pod rules of workload_rules, as a Kubernetes ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, served from Kubernetes 1.30) and its binding. Pure
Python, for the role smshare.kai.admission_policy (through the filters of
plugins/filter/admission_policy.py) and the unit tests.

    objects(name="smshare-kai-workload-rules", action="Warn",
            namespace_selector={"matchLabels": {...}})      # [policy, binding, policy, binding]
    served(cluster_info)                                    # {ok, message}: refuse an old cluster

One place decides what a rule is: workload_rules.RULES gives each rule its severity and
its message, and workload_rules.NEEDS names the rules that need more than the one object
admission sees. Every other rule is a CEL validation here (VALIDATIONS); the unit tests
fail when a rule is in neither, and evaluate every expression against the linter's case
table (tests/unit/plugins/module_utils/workload_case_table.py).

Two policies, so a rule's severity survives admission: the error rules' binding takes the
role's action (Warn or Deny), the warning rules' binding always warns. The validations
are written in the CEL that Kubernetes enables everywhere: the standard macros and
functions and cel-go's extended strings library (trim, split, substring, replace).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.smshare.kai.plugins.module_utils import workload_rules as wr

API_GROUP = "admissionregistration.k8s.io"
API_VERSION = API_GROUP + "/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
# Kubernetes serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy from 1.30 (GA);
# 1.26 had it as v1alpha1 and 1.28 as v1beta1, both behind a feature gate.
SERVED_FROM = "1.30"
ACTIONS = ("Warn", "Deny")
FAILURE_POLICIES = ("Fail", "Ignore")
DEFAULT_NAME = "smshare-kai-workload-rules"
WARNINGS_SUFFIX = "-warnings"
MANAGED_BY = {"app.kubernetes.io/managed-by": "smshare.kai", "app.kubernetes.io/part-of": "smshare.kai"}

# kind -> (API group, resource): the kinds workload_rules checks, which the policy matches.
KIND_RESOURCES = {
    "Pod": ("", "pods"),
    "ReplicationController": ("", "replicationcontrollers"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "JobSet": ("jobset.x-k8s.io", "jobsets"),
    "PyTorchJob": ("kubeflow.org", "pytorchjobs"),
    "TFJob": ("kubeflow.org", "tfjobs"),
    "XGBoostJob": ("kubeflow.org", "xgboostjobs"),
    "JAXJob": ("kubeflow.org", "jaxjobs"),
    "MPIJob": ("kubeflow.org", "mpijobs"),
    "RayCluster": ("ray.io", "rayclusters"),
    "RayJob": ("ray.io", "rayjobs"),
    "RayService": ("ray.io", "rayservices"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    "PodGroup": ("scheduling.run.ai", "podgroups"),
}
# Pods are judged when created only: KAI's binder writes the gpus.devices annotations and its
# podgrouper pod-group-name on a pod it already admitted (UPDATE), which the rules would refuse.
CREATE_ONLY = ("pods",)

# What admission judges (matchConditions, evaluated before the validations):
MATCH_CONDITIONS = [
    # What people write, not what a controller makes from it: a Deployment's pods, a CronJob's
    # Jobs and the podgrouper's PodGroups were judged through their owner (as workload_lint
    # judges live objects).
    ("not-made-by-a-controller",
     "!(has(object.metadata) && has(object.metadata.ownerReferences) && "
     "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))"),
    # An update is judged when it changes the spec: the controllers' own writes (a revision
    # annotation, a label) never fail on an object admitted before the policy was.
    ("create-or-spec-change",
     "request.operation != 'UPDATE' || !has(oldObject.spec) || !has(object.spec) || "
     "object.spec != oldObject.spec"),
]


# ---------------------------------------------------------------- CEL pieces
def _lit(text):
    if "'" in text or "\\" in text or "\n" in text:
        raise ValueError("not a plain CEL literal: %r" % text)
    return "'%s'" % text


def _re(pattern):
    """A whole-string RE2 pattern as a CEL raw string (CEL's matches() searches)."""
    if "'" in pattern or "\n" in pattern:
        raise ValueError("pattern cannot be a CEL raw string: %r" % pattern)
    return "r'^(?:%s)$'" % pattern


def _list(items):
    return "[%s]" % ", ".join(_lit(i) for i in items)


def _has(base, *fields):
    """has(base.a) && has(base.a.b) ... for a chain of fields."""
    parts, path = [], base
    for field in fields:
        parts.append("has(%s.%s)" % (path, field))
        path = "%s.%s" % (path, field)
    return parts[0] if len(parts) == 1 else "(%s)" % " && ".join(parts)


def _get(base, fields, default):
    """base.a.b when every field is there, else default."""
    return "(%s ? %s.%s : %s)" % (_has(base, *fields), base, ".".join(fields), default)


# Patterns, taken from the linter where it keeps them (so the two cannot read keys differently).
CONTAINER_KEY = wr.CONTAINER_ANNOTATION.pattern                              # nvidia.com/container.<c>.<s>
SHARE_KEY = r"nvidia\.com/container\.[^.]+\.(?:%s)" % wr.FRACTION_SETTINGS.pattern
MEMORY_KEY = r"nvidia\.com/container\.[^.]+\.gpu-memory\.(?:request|limit)"
REQUEST_KEY = r"nvidia\.com/container\.[^.]+\.gpu-memory\.request"
RESERVED_KEY = r"nvidia\.com/container\.[^.]+\.%s" % re.escape(wr.RESERVED_SETTING)
QUANTITY = wr.QUANTITY.pattern
# the linter's inline patterns (_check_fraction_annotations, _whole, _dns_label)
DECIMAL = r"[0-9]*\.?[0-9]+([eE]-?[0-9]+)?"
DIGITS = r"[0-9]+"
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# a sum of up to this many replica specs (CEL has no fold; no Kubeflow kind has more than 5 types)
MAX_REPLICA_TYPES = 16


def _whole(value):
    """CEL: a string annotation that workload_rules._whole takes (a positive whole number)."""
    return "(%s.trim().matches(%s) && %s.trim().matches(r'[1-9]'))" % (value, _re(DIGITS), value)


def _whole_any(value):
    """CEL: workload_rules._whole on a field that may be an int or a string."""
    return "(type(%s) == int ? %s > 0 : (type(%s) == string ? %s : false))" % (value, value, value, _whole(value))


def _more_than(value, number):
    """CEL: the whole-number string value is larger than the int number (18 digits and more: always)."""
    return "(size(%s.trim()) > 18 || int(%s.trim()) > %s)" % (value, value, number)


def _count(value):
    """CEL: workload_rules._count (a whole number >= 0), for a field known to be present."""
    return "(type(%s) == int && %s >= 0)" % (value, value)


def _amount(value):
    """CEL: a Kubernetes quantity (QUANTITY) as a double, as workload_rules._quantity computes it."""
    binary = ", ".join("%s: %d.0" % (_lit(k), v) for k, v in sorted(wr.QUANTITY_FACTORS.items(), key=str)
                       if k and k.endswith("i"))
    decimal = ", ".join("%s: %d.0" % (_lit(k), v) for k, v in sorted(wr.QUANTITY_FACTORS.items(), key=str)
                        if k and not k.endswith("i"))
    return ("({v}.matches(r'[KMGTPE]i$') ? double({v}.substring(0, size({v}) - 2)) * {{{b}}}[{v}.substring(size({v}) - 2)]"
            " : ({v}.matches(r'[kMGTPE]$') ? double({v}.substring(0, size({v}) - 1)) * {{{d}}}[{v}.substring(size({v}) - 1)]"
            " : double({v})))").format(v=value, b=binary, d=decimal)


def _quantity_ok(value):
    """CEL: workload_rules' nvfractions-quantity accepts the value (a positive quantity)."""
    return "(%s.matches(%s) && %s.matches(r'[1-9]'))" % (value, _re(QUANTITY), value)


# ---------------------------------------------------------------- variables
def _annotations_of(node):
    return _get(node, ("metadata", "annotations"), "{}")


def _record(template, nested, owners):
    """One pod template, as workload_rules.Template sees it: the template itself, whether it
    sits inside a workload, and the annotations of each object on its owner chain (_owners)."""
    return "{'t': dyn(%s), 'nested': dyn(%s), 'owners': dyn([%s])}" % (
        template, "true" if nested else "false", ", ".join(_annotations_of(o) for o in owners))


def _balanced(operator, items, empty):
    """items joined by a binary operator as a balanced tree: parsers limit how deep an expression
    nests (cel-cpp's default is 32), and a chain of n terms nests n deep."""
    items = list(items)
    if not items:
        return empty
    while len(items) > 1:
        items = ["(%s %s %s)" % (items[i], operator, items[i + 1]) if i + 1 < len(items) else items[i]
                 for i in range(0, len(items), 2)]
    return items[0]


def _kind_templates():
    """[(variable, CEL)]: workload_rules.templates(object) for each kind, one variable each (the
    others are [] for that object)."""
    found = [("podTemplates", "variables.kind == 'Pod' ? [%s] : []" % _record("object", False, ["object"]))]
    for kind in sorted(wr.TEMPLATES):
        fields = wr.TEMPLATES[kind][0]
        chain = ["object"] + ["object." + ".".join(fields[:i + 1]) for i in range(len(fields))]
        found.append((_variable(kind), "variables.kind == %s && %s ? [%s] : []" % (
            _lit(kind), _has("object", *fields), _record(chain[-1], True, chain))))
    found.append((_variable("JobSet"), "variables.kind == 'JobSet' && %s ? object.spec.replicatedJobs.filter(j, %s)"
                  ".map(j, %s) : []" % (
                      _has("object", "spec", "replicatedJobs"), _has("j", "template", "spec", "template"),
                      _record("j.template.spec.template", True, ["object", "j.template", "j.template.spec.template"]))))
    for kind in sorted(wr.KUBEFLOW):
        key = wr.KUBEFLOW[kind][0]
        specs = "object.spec.%s" % key
        found.append((_variable(kind), "variables.kind == %s && %s ? %s.filter(k, has(%s[k].template)).map(k, %s) : []"
                      % (_lit(kind), _has("object", "spec", key), specs, specs,
                         _record("%s[k].template" % specs, True, ["object", "%s[k].template" % specs]))))
    lws = "object.spec.leaderWorkerTemplate"
    found.append((_variable("LeaderWorkerSet"), "variables.kind == 'LeaderWorkerSet' ? %s : []" % " + ".join(
        "(%s ? [%s] : [])" % (_has("object", "spec", "leaderWorkerTemplate", key),
                              _record("%s.%s" % (lws, key), True, ["object", "%s.%s" % (lws, key)]))
        for key in wr.LWS_TEMPLATES)))
    for kind in sorted(wr.RAY):
        fields = wr.RAY[kind]
        cluster = "object." + ".".join(fields)
        head = "%s.headGroupSpec.template" % cluster
        found.append((_variable(kind), "variables.kind == %s && %s ? (%s ? [%s] : []) + (%s ? %s.workerGroupSpecs"
                      ".filter(g, has(g.template)).map(g, %s) : []) : []" % (
                          _lit(kind), _has("object", *fields), _has(cluster, "headGroupSpec", "template"),
                          _record(head, True, ["object", head]), _has(cluster, "workerGroupSpecs"), cluster,
                          _record("g.template", True, ["object", "g.template"]))))
    return found


def _variable(kind):
    return kind[0].lower() + kind[1:] + "Templates"


TEMPLATE_FIELDS = (
    "variables.raw.map(x, {"
    "'ann': dyn(%s), 'labels': dyn(%s), 'spec': dyn(%s), "
    "'containers': dyn(%s + %s), 'first': dyn(%s), 'nested': x.nested, 'owners': x.owners})" % (
        _annotations_of("x.t"), _get("x.t", ("metadata", "labels"), "{}"), _get("x.t", ("spec",), "{}"),
        _get("x.t", ("spec", "initContainers"), "[]"), _get("x.t", ("spec", "containers"), "[]"),
        "(%s && size(x.t.spec.containers) > 0 && has(x.t.spec.containers[0].name) ? [x.t.spec.containers[0].name]"
        " : [])" % _has("x.t", "spec", "containers")))


# ---------------------------------------------------------------- the rules, in CEL
def _any_template(condition):
    return "variables.templates.exists(t, %s)" % condition


POD_LEVEL = _list(wr.POD_LEVEL)
FRACTIONAL_ANNOTATION = "(%s in t.ann || %s in t.ann)" % (_lit(wr.FRACTION), _lit(wr.GPU_MEMORY))
# the containers that ask for a share (workload_rules.fractional_containers): the one gpu-fraction or
# gpu-memory goes to, and every one an NvFractions share annotation names
TARGET = "(%s in t.ann ? [t.ann[%s]] : t.first)" % (_lit(wr.CONTAINER_NAME), _lit(wr.CONTAINER_NAME))
SHARE_NAMES = "t.ann.filter(k, k.matches(%s)).map(k, k.split('.')[2])" % _re(SHARE_KEY)
ASKING = "((%s ? %s : []) + %s)" % (FRACTIONAL_ANNOTATION, TARGET, SHARE_NAMES)
FRACTIONAL = "(%s || t.ann.exists(k, k.matches(%s)))" % (FRACTIONAL_ANNOTATION, _re(SHARE_KEY))
NAMES = "t.containers.filter(c, has(c.name)).map(c, c.name)"
QUEUE = _lit(wr.QUEUE_LABEL)
MIN_MEMBER = _lit(wr.MIN_MEMBER)
NOT_JOINING = "!(%s in t.ann)" % _lit(wr.POD_GROUP)


def _uid(container):
    """CEL: the effective runAsUser of a container (its own over the pod's), -1 when none."""
    own = "%s && type(%s.securityContext.runAsUser) == int && %s.securityContext.runAsUser >= 0" % (
        _has(container, "securityContext", "runAsUser"), container, container)
    return "(%s ? %s.securityContext.runAsUser : %s)" % (own, container, POD_UID)


def _nonroot(container, wanted):
    """CEL: the effective runAsNonRoot of a container is `wanted` (true/false); unset is neither."""
    own = "%s && type(%s.securityContext.runAsNonRoot) == bool" % (
        _has(container, "securityContext", "runAsNonRoot"), container)
    return "(%s ? %s.securityContext.runAsNonRoot == %s : %s)" % (own, container, wanted, _pod_nonroot(wanted))


POD_UID = "(%s && type(t.spec.securityContext.runAsUser) == int && t.spec.securityContext.runAsUser >= 0 ? " \
          "t.spec.securityContext.runAsUser : -1)" % _has("t.spec", "securityContext", "runAsUser")


def _pod_nonroot(wanted):
    return "(%s && type(t.spec.securityContext.runAsNonRoot) == bool && t.spec.securityContext.runAsNonRoot == %s)" % (
        _has("t.spec", "securityContext", "runAsNonRoot"), wanted)


GETTING = "t.containers.filter(c, has(c.name) && c.name in %s)" % ASKING


def _root(situation):
    """fraction-runs-as-root (workload_rules._check_root): "error" for a container that runs as
    uid 0 or a share container with runAsNonRoot false, "warning" for a share container that
    leaves runAsNonRoot unset (no non-zero runAsUser either). Without a share container in the
    pod, the pod's own securityContext decides."""
    if situation == "error":
        containers = "t.containers.exists(c, %s == 0)" % _uid("c")
        share = "%s.exists(g, %s == -1 && %s)" % (GETTING, _uid("g"), _nonroot("g", "false"))
        pod = "(!(%s > 0) && %s)" % (POD_UID, _pod_nonroot("false"))
        return "%s && (%s || (size(%s) > 0 ? %s : %s))" % (FRACTIONAL, containers, GETTING, share, pod)
    share = "%s.exists(g, %s == -1 && !%s && !%s)" % (GETTING, _uid("g"), _nonroot("g", "true"), _nonroot("g", "false"))
    pod = "(!(%s > 0) && !%s && !%s)" % (POD_UID, _pod_nonroot("true"), _pod_nonroot("false"))
    return "%s && (size(%s) > 0 ? %s : %s)" % (FRACTIONAL, GETTING, share, pod)


def _gang_fits(annotation, spec):
    """CEL: min-member-too-large of workload_rules._gang_fits: the annotation (a valid whole number)
    asks for more pods than the Job spec runs at once."""
    parallelism = _get(spec[0], spec[1:] + ("parallelism",), "1")
    completions_set = _has(spec[0], *(spec[1:] + ("completions",)))
    completions = "%s.%s" % (spec[0], ".".join(spec[1:] + ("completions",)))
    at_once = "(%s && %s < %s ? %s : %s)" % (completions_set, completions, parallelism, completions, parallelism)
    return "(%s && %s && (!%s || %s) && %s)" % (
        _whole(annotation), _count(parallelism), completions_set, _count(completions), _more_than(annotation, at_once))


def _sum(values):
    """CEL: the sum of a list of ints of at most MAX_REPLICA_TYPES (CEL has no fold)."""
    return _balanced("+", ["(size(%s) > %d ? %s[%d] : 0)" % (values, i, values, i)
                           for i in range(MAX_REPLICA_TYPES)], "0")


KUBEFLOW_KINDS = _list(sorted(wr.KUBEFLOW))
IS_KUBEFLOW = "variables.kind in %s" % KUBEFLOW_KINDS
KUBEFLOW_SPECS = "variables.kubeflowSpecs"
MIN_AVAILABLE = ("object", "spec", "runPolicy", "schedulingPolicy", "minAvailable")
HAS_MIN_AVAILABLE = _has(*MIN_AVAILABLE)
MIN_AVAILABLE_VALUE = ".".join(MIN_AVAILABLE)


def _kubeflow_variables():
    """The Kubeflow job's replica specs map ({} for another kind), the replica types its podgrouper
    requires, and each spec's replicas (0 where not an int)."""
    specs, required = "{}", "[]"
    for kind in sorted(wr.KUBEFLOW, reverse=True):
        key, types = wr.KUBEFLOW[kind]
        specs = "variables.kind == %s ? %s : (%s)" % (_lit(kind), _get("object", ("spec", key), "{}"), specs)
        required = "variables.kind == %s ? %s : (%s)" % (_lit(kind), _list(types) if types else "[]", required)
    replicas = "%s.map(k, has(%s[k].replicas) && type(%s[k].replicas) == int ? %s[k].replicas : 0)" % (
        (KUBEFLOW_SPECS,) * 4)
    return [("kubeflowSpecs", specs), ("kubeflowRequired", required), ("kubeflowReplicas", replicas)]


KUBEFLOW_MIN_MEMBER_VALUE = "%s && %s && !%s" % (IS_KUBEFLOW, HAS_MIN_AVAILABLE, _whole_any(MIN_AVAILABLE_VALUE))
KUBEFLOW_TOO_LARGE = (
    "%s && %s && type(%s) == int && %s > 0 && %s.all(k, has(%s[k].replicas) && type(%s[k].replicas) == int) && "
    "size(%s) <= %d && %s > %s" % (
        IS_KUBEFLOW, HAS_MIN_AVAILABLE, MIN_AVAILABLE_VALUE, MIN_AVAILABLE_VALUE, KUBEFLOW_SPECS, KUBEFLOW_SPECS,
        KUBEFLOW_SPECS, KUBEFLOW_SPECS, MAX_REPLICA_TYPES, MIN_AVAILABLE_VALUE, _sum("variables.kubeflowReplicas")))
KUBEFLOW_SIZES = (
    "%s && !(%s) && (variables.kubeflowRequired.exists(r, !(r in %s)) || "
    "%s.exists(k, !(has(%s[k].replicas) && type(%s[k].replicas) == int && %s[k].replicas > 0)))" % (
        IS_KUBEFLOW, HAS_MIN_AVAILABLE, KUBEFLOW_SPECS, KUBEFLOW_SPECS, KUBEFLOW_SPECS, KUBEFLOW_SPECS,
        KUBEFLOW_SPECS))


VARIABLES = [
    ("kind", "has(object.kind) ? object.kind : ''"),
    ("annotations", _annotations_of("object")),
    ("labels", _get("object", ("metadata", "labels"), "{}")),
    ("controlled", "%s && object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true)"
     % _has("object", "metadata", "ownerReferences")),
    ("ownerless", "!(%s) || size(object.metadata.ownerReferences) == 0" % _has("object", "metadata", "ownerReferences")),
    # workload_rules.templates(object), kind by kind: each pod template, whether it sits inside a
    # workload, and the annotations on its owner chain
] + _kind_templates() + [
] + _kubeflow_variables() + [
    ("raw", _balanced("+", ["variables." + name for name, _cel in _kind_templates()], "[]")),
    # the same, read once: ann, labels, spec, containers (init containers first), first (the first
    # container's name, or none), nested, owners
    ("templates", TEMPLATE_FIELDS),
]


def _ray_sizes():
    parts = []
    for kind in sorted(wr.RAY):
        groups = _get("object", wr.RAY[kind] + ("workerGroupSpecs",), "[]")
        parts.append("(variables.kind == %s && %s.exists(g, has(g.minReplicas) && has(g.replicas) && "
                     "type(g.minReplicas) == int && type(g.replicas) == int && g.minReplicas > g.replicas))"
                     % (_lit(kind), groups))
    return _balanced("||", parts, "false")


JOBS = _get("object", ("spec", "replicatedJobs"), "[]")
JOB_MIN_MEMBER = "%s.filter(j, %s && %s in j.template.metadata.annotations)" % (
    JOBS, _has("j", "template", "metadata", "annotations"), MIN_MEMBER)
TOP_MIN_MEMBER = "variables.annotations[%s]" % MIN_MEMBER
HAS_TOP_MIN_MEMBER = "%s in variables.annotations" % MIN_MEMBER
SUBGROUPS = _get("object", ("spec", "subGroups"), "[]")
PODGROUP = "variables.kind == 'PodGroup'"
IGNORING_KINDS = _list(sorted(wr.KUBEFLOW) + sorted(wr.RAY) + ["LeaderWorkerSet"])

# (rule, severity, CEL that is true when the object breaks the rule). A rule may take several
# validations; the object breaks it when any of them is true.
VIOLATIONS = [
    ("scheduler-name", wr.ERROR, _any_template(
        "(t.ann.exists(k, k in %s || k.startsWith('kai.scheduler/') || k.matches(%s)) || "
        "t.labels.exists(k, k == %s || k.startsWith('kai.scheduler/')) || "
        "(t.nested && (%s in variables.labels || %s))) && "
        "!(has(t.spec.schedulerName) && t.spec.schedulerName == %s)" % (
            POD_LEVEL, _re(CONTAINER_KEY), QUEUE, QUEUE, HAS_TOP_MIN_MEMBER, _lit(wr.SCHEDULER)))),
    ("gpu-fraction-range", wr.ERROR, _any_template(
        "{f} in t.ann && !(t.ann[{f}].trim().matches({d}) && double(t.ann[{f}].trim()) > 0.0 && "
        "double(t.ann[{f}].trim()) < 1.0)".format(f=_lit(wr.FRACTION), d=_re(DECIMAL)))),
    ("gpu-memory-value", wr.ERROR, _any_template(
        "%s in t.ann && !%s" % (_lit(wr.GPU_MEMORY), _whole("t.ann[%s]" % _lit(wr.GPU_MEMORY))))),
    ("fraction-and-memory", wr.ERROR, _any_template(
        "%s in t.ann && %s in t.ann" % (_lit(wr.FRACTION), _lit(wr.GPU_MEMORY)))),
    ("num-devices", wr.ERROR, _any_template(
        "%s in t.ann && (!%s || !%s)" % (_lit(wr.NUM_DEVICES), _whole("t.ann[%s]" % _lit(wr.NUM_DEVICES)),
                                         FRACTIONAL_ANNOTATION))),
    ("fraction-with-whole-gpu", wr.ERROR, _any_template(
        "%s && t.containers.exists(c, %s)" % (FRACTIONAL_ANNOTATION, " || ".join(
            "(%s && %s in c.resources.%s)" % (_has("c", "resources", section), _lit(wr.GPU_RESOURCE), section)
            for section in ("limits", "requests"))))),
    ("one-fractional-container", wr.ERROR, _any_template(
        "%s.exists(a, %s.exists(b, a != b))" % (ASKING, ASKING))),
    ("unknown-container", wr.ERROR, _any_template(
        "(%s in t.ann && !(t.ann[%s] in %s)) || t.ann.exists(k, k.matches(%s) && !k.matches(%s) && "
        "!(k.split('.')[2] in %s))" % (_lit(wr.CONTAINER_NAME), _lit(wr.CONTAINER_NAME), NAMES, _re(CONTAINER_KEY),
                                       _re(RESERVED_KEY), NAMES))),
    ("nvfractions-quantity", wr.ERROR, _any_template(
        "t.ann.exists(k, k.matches(%s) && !%s)" % (_re(MEMORY_KEY), _quantity_ok("t.ann[k]")))),
    ("nvfractions-quantity", wr.ERROR, _any_template(
        "t.ann.exists(k, k.matches({r}) && k.replace('.gpu-memory.request', '.gpu-memory.limit') in t.ann && "
        "{ok_r} && {ok_l} && {amount_r} > {amount_l})".format(
            r=_re(REQUEST_KEY), ok_r=_quantity_ok("t.ann[k]"),
            ok_l=_quantity_ok("t.ann[k.replace('.gpu-memory.request', '.gpu-memory.limit')]"),
            amount_r=_amount("t.ann[k]"),
            amount_l=_amount("t.ann[k.replace('.gpu-memory.request', '.gpu-memory.limit')]")))),
    ("reserved-annotation", wr.ERROR, _any_template("t.ann.exists(k, k.matches(%s))" % _re(RESERVED_KEY))),
    ("annotation-placement", wr.ERROR,
     "variables.kind != 'Pod' && size(variables.templates) > 0 && "
     "variables.annotations.exists(k, k in %s || k.matches(%s))" % (POD_LEVEL, _re(CONTAINER_KEY))),
    ("legacy-queue-label", wr.ERROR, _any_template(
        "%s && (%s in t.labels || %s in variables.labels) && !(%s in t.labels) && !(%s in variables.labels)" % (
            NOT_JOINING, _lit(wr.LEGACY_QUEUE_LABEL), _lit(wr.LEGACY_QUEUE_LABEL), QUEUE, QUEUE))),
    ("queue-label-missing", wr.WARNING, _any_template(
        "%s && !(t.nested && %s in variables.labels) && !(%s in t.labels) && "
        "has(t.spec.schedulerName) && t.spec.schedulerName == %s && !(!t.nested && variables.controlled)" % (
            NOT_JOINING, QUEUE, QUEUE, _lit(wr.SCHEDULER)))),
    ("queue-label-conflict", wr.WARNING, _any_template(
        "%s && t.nested && %s in variables.labels && %s in t.labels && t.labels[%s] != variables.labels[%s]" % (
            NOT_JOINING, QUEUE, QUEUE, QUEUE, QUEUE))),
    ("min-member-value", wr.ERROR, "%s && !%s" % (HAS_TOP_MIN_MEMBER, _whole(TOP_MIN_MEMBER))),
    ("min-member-value", wr.ERROR, "variables.kind == 'JobSet' && %s.exists(j, !%s)" % (
        JOB_MIN_MEMBER, _whole("j.template.metadata.annotations[%s]" % MIN_MEMBER))),
    ("min-member-value", wr.ERROR, KUBEFLOW_MIN_MEMBER_VALUE),
    ("min-member-too-large", wr.ERROR, "variables.kind == 'Job' && %s && %s" % (
        HAS_TOP_MIN_MEMBER, _gang_fits(TOP_MIN_MEMBER, ("object", "spec")))),
    ("min-member-too-large", wr.ERROR, "variables.kind == 'JobSet' && %s && %s && %s" % (
        HAS_TOP_MIN_MEMBER, _whole(TOP_MIN_MEMBER), _more_than(TOP_MIN_MEMBER, "size(%s)" % JOBS))),
    ("min-member-too-large", wr.ERROR, "variables.kind == 'JobSet' && %s.exists(j, %s)" % (
        JOB_MIN_MEMBER, _gang_fits("j.template.metadata.annotations[%s]" % MIN_MEMBER, ("j", "template", "spec")))),
    ("min-member-too-large", wr.ERROR, KUBEFLOW_TOO_LARGE),
    ("group-sizes", wr.ERROR, KUBEFLOW_SIZES),
    ("group-sizes", wr.ERROR, "variables.kind == 'LeaderWorkerSet' && %s && !(object.spec.startupPolicy in %s)" % (
        _has("object", "spec", "startupPolicy"), _list(wr.LWS_STARTUP_POLICIES))),
    ("group-sizes", wr.ERROR, _ray_sizes()),
    ("min-member-ignored", wr.WARNING, "%s && variables.kind in %s && %s" % (
        HAS_TOP_MIN_MEMBER, IGNORING_KINDS, _whole(TOP_MIN_MEMBER))),
    ("podgroup-spec", wr.ERROR, "%s && (%s)" % (PODGROUP, " || ".join(
        ["(%s && !%s)" % (_has("object", "spec", key), _count("object.spec.%s" % key))
         for key in ("minMember", "minSubGroup")]
        + ["(%s && %s)" % (_has("object", "spec", "minMember"), _has("object", "spec", "minSubGroup"))]))),
    ("podgroup-spec", wr.ERROR, "%s && (%s)" % (PODGROUP, " || ".join([
        "{g}.exists(g, !(has(g.name) && type(g.name) == string && g.name.matches({dns})))",
        "{g}.exists(g, has(g.name) && size({g}.filter(h, has(h.name) && h.name == g.name)) > 1)",
        "{g}.exists(g, has(g.parent) && !{g}.exists(h, has(h.name) && h.name == g.parent))",
        "{g}.exists(g, has(g.name) && has(g.minMember) && {g}.exists(h, has(h.parent) && h.parent == g.name))",
    ]).format(g=SUBGROUPS, dns=_re(DNS_LABEL)))),
    ("podgroup-queue-missing", wr.WARNING, "%s && !(%s && object.spec.queue != '')" % (
        PODGROUP, _has("object", "spec", "queue"))),
    ("pod-group-skip", wr.ERROR, _any_template(
        "%s in t.ann && (t.nested || !variables.ownerless) && "
        "!t.owners.exists(o, %s in o && o[%s] == 'true')" % (
            _lit(wr.POD_GROUP), _lit(wr.SKIP_PODGROUPER), _lit(wr.SKIP_PODGROUPER)))),
    ("fraction-runs-as-root", wr.ERROR, _any_template(_root("error"))),
    ("fraction-runs-as-root", wr.WARNING, _any_template(_root("warning"))),
]


def cel_rules():
    """The rules the policy checks (every rule workload_rules judges on one object alone)."""
    return sorted(set(rule for rule, _severity, _cel in VIOLATIONS))


def message(rule, severity):
    """A validation's message: the linter's rule text, its id and severity (no line breaks)."""
    text = "%s [%s] (smshare.kai workload_lint rule, %s)" % (wr.RULES[rule][1], rule, severity)
    if rule == "fraction-runs-as-root" and severity == wr.WARNING:
        text += ": runAsNonRoot is unset, so the image's USER decides"
    return text


def validations(severity):
    """[{expression, message, ...}] of one severity, in VIOLATIONS order, and [rule] beside them."""
    found, rules = [], []
    for rule, rule_severity, violation in VIOLATIONS:
        if rule_severity != severity:
            continue
        found.append({"expression": "!(%s)" % violation, "message": message(rule, severity),
                      "reason": "Invalid"})
        rules.append(rule)
    return found, rules


# ---------------------------------------------------------------- the objects
class BadInput(ValueError):
    def __init__(self, parameter, msg):
        ValueError.__init__(self, msg)
        self.parameter = parameter
        self.msg = msg


NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def check_selector(selector):
    """Refuse what the API would refuse in a namespaceSelector (a LabelSelector), naming it."""
    example = "{matchLabels: {smshare.kai/workload-rules: enforced}}"
    if not isinstance(selector, dict) or not selector or set(selector) - {"matchLabels", "matchExpressions"}:
        raise BadInput("namespace_selector", "must be a label selector with matchLabels and/or matchExpressions "
                       "(an empty one would select every namespace), e.g. %s" % example)
    for key, value in (selector.get("matchLabels") or {}).items():
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key) or len(key.split("/")[-1]) > 63:
            raise BadInput("namespace_selector", "matchLabels key %r is not a label key, e.g. %s" % (key, example))
        if not isinstance(value, str) or not LABEL_VALUE.fullmatch(value) or len(value) > 63:
            raise BadInput("namespace_selector", "matchLabels %s: %r is not a label value (a string of at most 63 "
                           "letters, digits, '-', '_', '.'); quote numbers and booleans" % (key, value))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise BadInput("namespace_selector", "matchExpressions must be a list, e.g. "
                       "[{key: team, operator: In, values: [ml]}]")
    for item in expressions:
        if not isinstance(item, dict) or not LABEL_KEY.fullmatch(str(item.get("key", ""))) \
                or item.get("operator") not in SELECTOR_OPERATORS:
            raise BadInput("namespace_selector", "matchExpressions item %r needs a label key and an operator of %s"
                           % (item, ", ".join(SELECTOR_OPERATORS)))
        values = item.get("values")
        if item["operator"] in ("In", "NotIn") and not (isinstance(values, list) and values
                                                        and all(isinstance(v, str) for v in values)):
            raise BadInput("namespace_selector", "matchExpressions %s %s needs values, a non-empty list of strings"
                           % (item["key"], item["operator"]))
        if item["operator"] in ("Exists", "DoesNotExist") and values:
            raise BadInput("namespace_selector", "matchExpressions %s %s takes no values" % (
                item["key"], item["operator"]))
    if not (selector.get("matchLabels") or expressions):
        raise BadInput("namespace_selector", "selects every namespace: give matchLabels or matchExpressions, "
                       "e.g. %s" % example)


def _resource_rules():
    rules = []
    by_operations = {}
    for _kind, (group, resource) in sorted(KIND_RESOURCES.items(), key=lambda item: item[1]):
        operations = ("CREATE",) if resource in CREATE_ONLY else ("CREATE", "UPDATE")
        by_operations.setdefault((group, operations), []).append(resource)
    for (group, operations), resources in sorted(by_operations.items()):
        rules.append({"apiGroups": [group], "apiVersions": ["*"], "operations": list(operations),
                      "resources": sorted(resources), "scope": "Namespaced"})
    return rules


def _metadata(name):
    return {"name": name, "labels": dict(MANAGED_BY)}


def objects(name=DEFAULT_NAME, action="Warn", namespace_selector=None, failure_policy="Fail"):
    """The two policies (error rules, warning rules) and their bindings, as manifests.
    Raises BadInput (with .parameter) for a value the API server would refuse."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) + len(WARNINGS_SUFFIX) > 253:
        raise BadInput("name", "%r must be a DNS subdomain name (lowercase letters, digits, '-', '.'), e.g. %s"
                       % (name, DEFAULT_NAME))
    if action not in ACTIONS:
        raise BadInput("action", "%r must be one of %s (Warn first: see what would be refused)"
                       % (action, ", ".join(ACTIONS)))
    if failure_policy not in FAILURE_POLICIES:
        raise BadInput("failure_policy", "%r must be one of %s" % (failure_policy, ", ".join(FAILURE_POLICIES)))
    check_selector(namespace_selector)
    found = []
    for severity, policy_name, actions in ((wr.ERROR, name, [action]),
                                           (wr.WARNING, name + WARNINGS_SUFFIX, ["Warn"])):
        checks, _rules = validations(severity)
        found.append({
            "apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": _metadata(policy_name),
            "spec": {
                "failurePolicy": failure_policy,
                "matchConstraints": {"resourceRules": _resource_rules()},
                "matchConditions": [{"name": n, "expression": e} for n, e in MATCH_CONDITIONS],
                "variables": [{"name": n, "expression": e} for n, e in VARIABLES],
                "validations": checks,
            }})
        found.append({
            "apiVersion": API_VERSION, "kind": BINDING_KIND, "metadata": _metadata(policy_name),
            "spec": {"policyName": policy_name, "validationActions": actions,
                     "matchResources": {"namespaceSelector": namespace_selector}}})
    return found


# ---------------------------------------------------------------- the cluster
def served(cluster_info):
    """{ok, message}: whether the cluster (kubernetes.core.k8s_cluster_info's result) serves
    admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and its binding."""
    apis = (cluster_info or {}).get("apis") or {}
    server = (((cluster_info or {}).get("version") or {}).get("server") or {}).get("kubernetes") or {}
    version = server.get("gitVersion") or (
        "v%s.%s" % (server["major"], server["minor"]) if server.get("major") else "(version unknown)")
    kinds = (apis.get(API_VERSION) or {})
    missing = [kind for kind in (POLICY_KIND, BINDING_KIND) if kind not in kinds]
    if not missing:
        return {"ok": True, "version": version,
                "message": "Kubernetes %s serves %s %s and %s" % (version, API_VERSION, POLICY_KIND, BINDING_KIND)}
    older = sorted(group_version for group_version, resources in apis.items()
                   if group_version.startswith(API_GROUP + "/") and POLICY_KIND in (resources or {}))
    also = (" (it serves only %s, a pre-release API behind a feature gate: the role installs v1 only)"
            % ", ".join(older)) if older else ""
    return {"ok": False, "version": version, "message": (
        "Kubernetes %s does not serve %s %s: the API is served from Kubernetes %s (GA), and this cluster "
        "predates it%s. Upgrade the control plane to %s or later to install the admission policy, or keep "
        "checking manifests with smshare.kai.workload_lint (playbook smshare.kai.lint_workloads). Nothing "
        "was changed." % (version, API_VERSION, " and ".join(missing), SERVED_FROM, also, SERVED_FROM))}
