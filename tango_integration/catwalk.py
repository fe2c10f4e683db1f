"""Tango's ``catwalk`` integration: catwalk-steps's wheel installs this file as
``tango/integrations/catwalk.py`` (see setup.py).

Tango 1.3.2 has no plugin discovery: a registered name it does not know, such as
``catwalk::predict`` in a config run without ``-i catwalk_steps`` and without a ``tango.yml``
naming the package, makes it import ``tango.integrations.<prefix>``, then every module of the
current folder, then every integration of its own, where its transformers integration fails under
transformers 5 (``cannot import name 'modeling_flax_auto'``). With this file, the prefix
``catwalk`` is an integration: the package is imported and the name found, as ``torch::...``
names are.
"""

import logging

import catwalk_steps  # noqa: F401  (registers the catwalk:: steps, patches Tango)

logging.getLogger(__name__).info("catwalk_steps imported for a catwalk:: name (it was not named with -i)")
