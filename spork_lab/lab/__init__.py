"""The workbench: a scheduling session shown as a widget, IPython magics, the doctor and the lab launcher."""

from ._doctor import doctor
from ._ipython import load_ipython_extension
from ._launch import launch_lab
from ._session import Step, StepFailedWarning, Workbench

__all__ = ["Workbench", "Step", "StepFailedWarning", "doctor", "load_ipython_extension", "launch_lab"]
