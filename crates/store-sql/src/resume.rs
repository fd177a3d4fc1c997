//! `release_for_resume` of both engines (see
//! [`Coordination::release_for_resume`](korvus_store::Coordination::release_for_resume)):
//! one conditional statement; its failure path reads why it refused. And
//! `queue_position`, the line a released (or queued) row waits in.

/// The inherent `release_for_resume_row` of `$store`, expanded inside the
/// `lease` module's scope (its imports and `STATEMENTS`).
macro_rules! resume_rows {
    ($store:ty) => {
        impl $store {
            /// See [`Coordination::release_for_resume`](korvus_store::Coordination::release_for_resume).
            pub(crate) async fn release_for_resume_row(
                &self,
                id: SessionId,
                fence: u64,
                backoff: std::time::Duration,
            ) -> Result<Session> {
                let row: Option<SessionRow> = sqlx::query_as(&STATEMENTS.release_for_resume)
                    .bind(id.as_uuid())
                    .bind(to_i64(fence))
                    .bind($crate::session_row::RESUME_OWNER)
                    .bind($crate::session_row::RESUME_LEASE_MS)
                    .bind(i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX / 2))
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                match row {
                    Some(row) => row.into_model(Self::BACKEND),
                    None => {
                        let now = self.get_session(id).await?;
                        Err(now.refusal(fence).unwrap_or_else(|| {
                            if now.cancel_requested {
                                StoreError::resume_refused_for_cancel(id)
                            } else {
                                StoreError::Conflict {
                                    entity: Entity::Session,
                                    detail: format!("session {id} changed while it was released"),
                                }
                            }
                        }))
                    }
                }
            }

            /// See [`Coordination::queue_position`](korvus_store::Coordination::queue_position).
            pub(crate) async fn queue_position_row(&self, id: SessionId) -> Result<Option<u64>> {
                let ahead: Option<(i64,)> = sqlx::query_as(&STATEMENTS.queue_position)
                    .bind(id.as_uuid())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                Ok(ahead.map(|(n,)| u64::try_from(n).unwrap_or(0) + 1))
            }
        }
    };
}

pub(crate) use resume_rows;
