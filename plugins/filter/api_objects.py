# -*- coding: utf-8 -*-
# Apache-2.0
"""Filters over what the API server serves: the version serving a kind, the CRDs matching a
name, their objects and the references that delete them. Documentation: the .yml files
beside this one. Pure functions of their inputs: the unit tests call them alone."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re


def api_version_of(apis, kind):
    """The group/version serving `kind`, from kubernetes.core.k8s_cluster_info's
    `apis` ({group/version: {Kind: {...}}}); the preferred version first, None if
    no API serves it."""
    found = []
    for group_version, resources in (apis or {}).items():
        entry = (resources or {}).get(kind)
        if isinstance(entry, dict):
            found.append((not entry.get("preferred", False), group_version))
    return sorted(found)[0][1] if found else None


def crds_matching(crds, pattern):
    """CRDs whose name matches the regular expression (re.search), as
    {name, group, kind, version (the storage version), namespaced}."""
    found = []
    for crd in crds or []:
        name = (crd.get("metadata") or {}).get("name") or ""
        if not re.search(pattern, name):
            continue
        spec = crd.get("spec") or {}
        versions = spec.get("versions") or []
        storage = [v.get("name") for v in versions if v.get("storage")] or [v.get("name") for v in versions]
        found.append({"name": name, "group": spec.get("group"), "kind": (spec.get("names") or {}).get("kind"),
                      "version": storage[0] if storage else None, "namespaced": spec.get("scope") == "Namespaced"})
    return found


def custom_objects(results):
    """The objects listed by a k8s_info loop over crds_matching() items, as
    {api_version, kind, name, namespace}."""
    objects = []
    for result in results or []:
        crd = result.get("item") or {}
        for obj in result.get("resources") or []:
            meta = obj.get("metadata") or {}
            objects.append({"api_version": "%s/%s" % (crd.get("group"), crd.get("version")),
                            "kind": crd.get("kind"), "name": meta.get("name"),
                            "namespace": meta.get("namespace") or ""})
    return objects


def object_refs(objects):
    """custom_objects() rows as minimal manifests (apiVersion, kind, metadata), for
    kubernetes.core.k8s to delete them in one task."""
    refs = []
    for obj in objects or []:
        meta = {"name": obj["name"]}
        if obj.get("namespace"):
            meta["namespace"] = obj["namespace"]
        refs.append({"apiVersion": obj["api_version"], "kind": obj["kind"], "metadata": meta})
    return refs


def foreign_objects(objects, chart_objects):
    """'Kind namespace/name' of the objects not in chart_objects ({kind: [names]})."""
    return ["%s %s%s" % (o["kind"], (o["namespace"] + "/") if o["namespace"] else "", o["name"])
            for o in objects or [] if o["name"] not in (chart_objects or {}).get(o["kind"], [])]


class FilterModule(object):
    def filters(self):
        return {
            "api_version_of": api_version_of,
            "crds_matching": crds_matching,
            "custom_objects": custom_objects,
            "object_refs": object_refs,
            "foreign_objects": foreign_objects,
        }
