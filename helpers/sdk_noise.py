"""Quiet the SDK messages the course already explains, and only those."""

from __future__ import annotations

import logging
import warnings

TINKER_REST_LOGGER = "tinker.lib.public_interfaces.rest_client"
KNOWN_NOISE = ("DEPRECATED: RestClient.get_checkpoint_archive_url", "Creating checkpoint archive")


class _DropKnownDeprecationNoise(logging.Filter):
    """tinker 0.35 logs two lines on every signed-URL call (see requirements.txt for why we
    pin it); once per training step, they would bury the log. Any other message from that
    logger still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(KNOWN_NOISE)


def quiet_tinker_deprecation_logs() -> None:
    """Install the filter above, and silence the matching FutureWarning (notebook 02 explains
    it). `helpers.connect` calls this."""
    warnings.filterwarnings("ignore", message=KNOWN_NOISE[0], category=FutureWarning)
    logger = logging.getLogger(TINKER_REST_LOGGER)
    if not any(isinstance(f, _DropKnownDeprecationNoise) for f in logger.filters):
        logger.addFilter(_DropKnownDeprecationNoise())
