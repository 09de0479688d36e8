"""image_manifest_check: does the fork_images manifest record the build a chart role installs?"""
import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.smshare.kai.plugins.filter.image_manifest import image_manifest_check as check

KAI = "44d1d0a966465c69b1fd0d24b40b9a1ebb73699e"
FRAC = "af0544e4dbd1d8e03ca14fc1e06d6265fabed99b"
PATH = "/srv/manifest.json"
SERVICES = ["operator", "fractiond", "metricsd", "mpsd"]


def manifest(registry="harbor.corp/kai", tag="smshare-44d1d0a-af0544e", kai=KAI, frac=FRAC,
             frac_services=tuple(SERVICES)):
    images = [{"fork": "kai_scheduler", "service": "binder", "digest": "sha256:" + "1" * 64}]
    images += [{"fork": "gpu_fractioning", "service": s, "digest": "sha256:" + "2" * 64} for s in frac_services]
    return {"registry": registry, "tag": tag, "commits": {"kai_scheduler": kai, "gpu_fractioning": frac}, "images": images}


def kai(m):
    return check(m, PATH, "harbor.corp/kai", "smshare-44d1d0a-af0544e", KAI, "kai_scheduler", "KAI")


def frac(m):
    return check(m, PATH, "harbor.corp/kai", "smshare-44d1d0a-af0544e", FRAC, "gpu_fractioning", "gpu-fractioning", SERVICES)


def test_the_manifest_of_this_build_passes_both_roles():
    assert kai(manifest())["ok"] and frac(manifest())["ok"]


def test_no_manifest_says_so():
    assert kai(None) == {"ok": False, "message": "The image manifest /srv/manifest.json does not exist on the controller"}


@pytest.mark.parametrize("changed, words", [
    ({"registry": "harbor.corp/other"}, "records registry harbor.corp/other"),
    ({"tag": "smshare-0000000-af0544e"}, "tag smshare-0000000-af0544e"),
    ({"kai": "0" * 40}, "KAI commit " + "0" * 40),
])
def test_another_build_is_named_against_this_one(changed, words):
    result = kai(manifest(**changed))
    assert not result["ok"] and words in result["message"]
    assert result["message"].endswith("not harbor.corp/kai, smshare-44d1d0a-af0544e and %s with its images" % KAI)


def test_a_missing_service_fails_the_role_that_needs_it_and_names_what_is_there():
    result = frac(manifest(frac_services=("operator", "fractiond", "metricsd")))
    assert not result["ok"]
    assert "(images: fractiond, metricsd, operator)" in result["message"]
    assert result["message"].endswith("with operator, fractiond, metricsd, mpsd")
    assert kai(manifest(frac_services=()))["ok"]
    assert not frac(manifest(frac_services=()))["ok"]


def test_a_fork_without_images_fails_even_without_a_service_list():
    m = manifest()
    m["images"] = [i for i in m["images"] if i["fork"] != "kai_scheduler"]
    result = kai(m)
    assert not result["ok"] and "(images: none)" in result["message"]


def test_a_manifest_that_is_not_an_object_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match="/srv/manifest.json does not hold a JSON object"):
        kai(["not", "an", "object"])
