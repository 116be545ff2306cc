"""The "model from code" file MLflow stores with each registered bundle (`registry.mlflow_model`).

MLflow executes this file when the model loads; it only names the class, so no object is pickled.
"""

from mlflow.models import set_model
from routeforge.registry.mlflow_model import RouterModel

set_model(RouterModel())
