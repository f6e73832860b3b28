"""The component's entry point: ``build.sh`` names this module to
componentize-py, which exports the ``WitWorld`` class below as the world's
``handle`` and ``handle-batch`` functions (``rheo:handler@0.2.0``).

Importing ``app`` (the handler's own module, first on the build's Python
path) runs its ``@handler``. That import happens when the component is
built, not when it is called, so a module that registers no handler, or
fails to import, fails the build.
"""

import app  # noqa: F401 - imported for its @handler registration

import rheo_handler

if rheo_handler.registered() is None:
    raise RuntimeError(
        f"{app.__file__} registered no handler: decorate its function with "
        "@rheo_handler.handler or @rheo_handler.batch_handler"
    )


class WitWorld:
    """The export of the ``rheo:handler`` world."""

    def handle(self, delivery):
        return rheo_handler.dispatch(delivery)

    def handle_batch(self, deliveries):
        return rheo_handler.dispatch_batch(deliveries)
