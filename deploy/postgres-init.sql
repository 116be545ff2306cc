-- Run once by the postgres image at first start: one database per service (mlflow_auth: the
-- MLflow auth app's users and grants, deploy/mlflow/start-mlflow.sh).
CREATE DATABASE dagster;
CREATE DATABASE mlflow;
CREATE DATABASE mlflow_auth;
