# Apache-2.0
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter.pins import pair_tag

KAI = "44d1d0a966465c69b1fd0d24b40b9a1ebb73699e"
FRACTIONING = "af0544e4dbd1d8e03ca14fc1e06d6265fabed99b"


def test_the_guides_tag():
    assert pair_tag(KAI, FRACTIONING) == "smshare-44d1d0a-af0544e"


@pytest.mark.parametrize("kai, fractioning", [
    ("44d1d0a", FRACTIONING),                   # short SHA
    (KAI, "main"),                              # a branch
    (KAI.upper(), FRACTIONING),                 # git prints lowercase
    (None, FRACTIONING),
])
def test_anything_but_two_full_shas_is_refused(kai, fractioning):
    with pytest.raises(AnsibleFilterError, match="full 40-hex SHA"):
        pair_tag(kai, fractioning)
