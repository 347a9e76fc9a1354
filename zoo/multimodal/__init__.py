"""Prototype-based multimodal learning under missing or complementary modalities.

API (adaptive prototype imputation: SCOPE class-temporal prototypes and DIAM directional modulation) and CAMP
(coherent alignment of multimodal prototypes by optimal transport, a reconstruction). ICML 2026; the maths is in
docs/papers/api.md and docs/papers/camp.md.
"""

from icml26zoo.multimodal.api import APIConfig, APIModel, APIOutput, api_loss, set_prototypes
from icml26zoo.multimodal.api_registered import APIRegressor
from icml26zoo.multimodal.camp import Camp, CampEvidence, CampOptions, renormalise_prototypes
from icml26zoo.multimodal.camp_baseline import ConcatClassifier

__all__ = ["APIConfig", "APIModel", "APIOutput", "APIRegressor", "Camp", "CampEvidence", "CampOptions",
           "ConcatClassifier",
           "api_loss",
           "renormalise_prototypes", "set_prototypes"]
