//! [`Store::replace_checkpoints`](korvus_store::Store::replace_checkpoints)
//! on both engines: one transaction that guards the session's fence, deletes
//! the named checkpoint rows and inserts the new rows.
//!
//! The transaction is written once ([`sql_replace!`]); what differs — how a
//! batch of rows is inserted on a connection — is an associated function
//! of each engine's store here, beside it.

/// Implements `replace_checkpoint_rows` for a store type of
/// [`sql_store!`](crate::store::sql_store) whose engine connection is
/// `$conn` and which has an associated `insert_artifacts_on(&mut $conn,
/// &[NewArtifact], created_at) -> Result<u64>`.
macro_rules! sql_replace {
    ($store:ident, $conn:ty) => {
        const _: () = {
            use korvus_store::{
                constraint, validate, Artifact, ArtifactId, ArtifactKind, Entity, NewArtifact,
                Result, SessionId, Store as _, StoreError,
            };

            use $crate::completed::Completed as _;
            use $crate::dialect::StoreDialect;
            use $crate::error::backend;
            use $crate::rows::{self, SessionRow};
            use $crate::sql;

            impl $store {
                /// `replace_checkpoints` in one transaction: the guard (the
                /// session's row locked while it is active at `fence`), the
                /// session read back, each deletion, the insert.
                pub(crate) async fn replace_checkpoint_rows(
                    &self,
                    session: SessionId,
                    fence: u64,
                    insert: Vec<NewArtifact>,
                    mut delete: Vec<ArtifactId>,
                ) -> Result<Vec<Artifact>> {
                    validate::replacement(session, fence, &insert)?;
                    delete.sort();
                    delete.dedup();
                    let mut tx = self.pool.begin().await.map_err(backend(Self::BACKEND))?;
                    let guarded = sqlx::query(sql::GUARD_REPLACEMENT)
                        .bind(session.as_uuid())
                        .bind(rows::to_i64(fence))
                        .execute(&mut *tx)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if guarded.rows_affected() == 0 {
                        // Rolled back now, not when the connection is next used: its
                        // locks must be gone before the next step looks again.
                        let _ = tx.rollback().await;
                        let row = self.get_session(session).await?;
                        return Err(row.refusal(fence).unwrap_or(StoreError::Conflict {
                            entity: Entity::Session,
                            detail: format!(
                                "session {session} changed while it was written; try again"
                            ),
                        }));
                    }
                    let row: Option<SessionRow> = sqlx::query_as(sql::SELECT_SESSION)
                        .bind(session.as_uuid())
                        .fetch_optional_completed(&mut *tx)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    let row = row
                        .ok_or_else(|| StoreError::not_found(Entity::Session, session))?
                        .into_model(Self::BACKEND)?;
                    if insert.iter().any(|n| n.incident_id != row.incident_id) {
                        return Err(StoreError::Constraint {
                            name: constraint::ARTIFACTS_SESSION_FK.to_owned(),
                        });
                    }
                    for id in &delete {
                        let deleted = sqlx::query(sql::DELETE_CHECKPOINT)
                            .bind(id.as_uuid())
                            .bind(session.as_uuid())
                            .bind(rows::to_i64(fence))
                            .bind(ArtifactKind::Checkpoint.as_str())
                            .execute(&mut *tx)
                            .await
                            .map_err(backend(Self::BACKEND))?;
                        if deleted.rows_affected() == 0 {
                            return Err(StoreError::not_found(Entity::Artifact, id));
                        }
                    }
                    let created_at = rows::now();
                    if !insert.is_empty() {
                        let inserted =
                            Self::insert_artifacts_on(&mut *tx, &insert, created_at).await?;
                        if inserted != insert.len() as u64 {
                            return Err(StoreError::Conflict {
                                entity: Entity::Artifact,
                                detail: "the rows were refused: the session's fence moved".into(),
                            });
                        }
                    }
                    tx.commit().await.map_err(backend(Self::BACKEND))?;
                    Ok(insert
                        .into_iter()
                        .map(|n| n.stored_at(created_at))
                        .collect())
                }
            }
        };
    };
}
pub(crate) use sql_replace;
