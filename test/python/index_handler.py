"""A handler with an index, for index_test.go, run as
`python3 -m tether run index_handler.py ...`:

  index   "colours": the ConfigMaps labelled test.tether.dev/colour, by
          namespace, each one's colour
  create  a Widget's result is the colours indexed in its namespace,
          sorted: what the index held when the create ran
"""

from typing import Any

import tether

LABEL = "test.tether.dev/colour"


@tether.index("configmaps", labels={LABEL: tether.PRESENT})
def colours(namespace: str, labels: tether.Labels, **_: Any) -> Any:
    return {namespace: labels[LABEL]}


@tether.on.create("widgets.test.tether.dev", id="create")
def created(namespace: str, colours: tether.Index, **_: Any) -> Any:
    return {"colours": sorted(colours.get(namespace, []))}
