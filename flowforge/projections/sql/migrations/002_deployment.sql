-- Migration 2: the deployment's identity, one row written once, here (at `flowforge db
-- init` of a new database, or the migration of an older one). It names the deployment's
-- dispatch topology and is carried by every dispatch, so two deployments on one broker
-- never take each other's tasks (docs/delivery.md, "Deployments").

CREATE TABLE flowforge_deployment (
    singleton integer PRIMARY KEY CONSTRAINT flowforge_deployment_one_row CHECK (singleton = 1),
    deployment_id text NOT NULL
        CONSTRAINT flowforge_deployment_id_length CHECK (length(deployment_id) = 12),
    created_at {timestamp} NOT NULL
);
INSERT INTO flowforge_deployment (singleton, deployment_id, created_at)
VALUES (1, {random_deployment_id}, {now});
