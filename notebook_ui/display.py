"""What a notebook's output shows: tables whole, and Tinker's log without two known lines."""

from __future__ import annotations

import logging
import warnings

# tinker 0.35 logs two lines on every signed-URL call (requirements.txt says why the course pins
# it); once per training step, they would bury the log. Notebook 02 explains them.
TINKER_REST_LOGGER = "tinker.lib.public_interfaces.rest_client"
KNOWN_NOISE = ("DEPRECATED: RestClient.get_checkpoint_archive_url", "Creating checkpoint archive")


def _drop_known_noise(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(KNOWN_NOISE)


def quiet_tinker_deprecation_logs() -> None:
    """Drop the two known lines, and only those, from Tinker's REST logger, and silence the
    matching FutureWarning."""
    warnings.filterwarnings("ignore", message=KNOWN_NOISE[0], category=FutureWarning)
    logger = logging.getLogger(TINKER_REST_LOGGER)
    if _drop_known_noise not in logger.filters:
        logger.addFilter(_drop_known_noise)


def show_tables_whole() -> None:
    """Tables show every cell's text in full and as written: pandas cuts a cell at 50
    characters by default (a question, a stop token, a module list), and JupyterLab reads a
    pair of dollar amounts ("$2.50 ... $10.00") as maths unless pandas marks the table."""
    import pandas as pd

    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.html.use_mathjax", False)
