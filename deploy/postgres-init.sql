-- Run once by the postgres image at first start: one database per service.
CREATE DATABASE dagster;
CREATE DATABASE mlflow;
