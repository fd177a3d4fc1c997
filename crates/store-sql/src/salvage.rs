//! Kept output attached to a settled session, written once for both
//! engines by [`salvage_rows!`]: the inherent method behind
//! [`Coordination::attach_kept_output`](korvus_store::Coordination::attach_kept_output),
//! which [`sql_lease!`](crate::lease::sql_lease) expands it into.
//!
//! One transaction: the settled row's fence moves first (it takes the
//! row's write lock and checks fence, state and revision), then the
//! artifact rows go in one by one (a salvage is rare and bounded by the
//! file cap), then the revision's report row takes the salvage — updated
//! when it exists, inserted when it does not.

/// Writes `$store`'s `attach_kept_rows`, whose pool's connections are
/// `$conn`; see the module docs.
macro_rules! salvage_rows {
    ($store:ident, $conn:ty) => {
        impl $store {
            pub(crate) async fn attach_kept_rows(
                &self,
                id: korvus_store::SessionId,
                fence: u64,
                kept: korvus_store::KeptOutput,
            ) -> korvus_store::Result<(korvus_store::Session, korvus_store::Report)> {
                use korvus_store::{constraint, Entity};
                use $crate::completed::Completed as _;
                use $crate::dialect::StoreDialect;
                use $crate::error::backend;
                use $crate::rows::{self, to_i32, to_i64, SessionRow};
                use $crate::sql::SALVAGE_FENCE;

                kept.validate(id, fence)?;
                let err = backend(Self::BACKEND);
                let created_at = rows::now();
                let report = kept.report.stored_at(created_at);
                let mut tx = self.pool.begin().await.map_err(&err)?;
                let moved: Option<SessionRow> = sqlx::query_as(SALVAGE_FENCE)
                    .bind(id.as_uuid())
                    .bind(to_i64(fence))
                    .bind(to_i32(report.revision))
                    .fetch_optional_completed(&mut *tx)
                    .await
                    .map_err(&err)?;
                let Some(moved) = moved else {
                    // Rolled back now, not when the connection is next used: its
                    // locks must be gone before the next step looks again.
                    let _ = tx.rollback().await;
                    let now = self.get_session(id).await?;
                    return Err(now
                        .salvage_refusal(fence, report.revision)
                        .unwrap_or_else(|| korvus_store::StoreError::Conflict {
                            entity: Entity::Session,
                            detail: format!(
                                "session {id} changed while it was salvaged; try again"
                            ),
                        }));
                };
                let session = moved.into_model(Self::BACKEND)?;
                if session.incident_id != report.incident_id {
                    return Err(korvus_store::StoreError::Constraint {
                        name: constraint::REPORTS_SESSION_FK.to_owned(),
                    });
                }
                if !kept.artifacts.is_empty() {
                    Self::insert_settled_artifacts_on(&mut tx, &kept.artifacts, created_at).await?;
                }
                let stands = Self::kept_report_row(&mut tx, &report).await?;
                tx.commit().await.map_err(&err)?;
                Ok((session, stands))
            }
            /// The revision's report row takes the salvage (or is inserted
            /// from it), on its transaction; returns the row that stands.
            async fn kept_report_row(
                tx: &mut $conn,
                report: &korvus_store::Report,
            ) -> korvus_store::Result<korvus_store::Report> {
                use $crate::completed::Completed as _;
                use $crate::dialect::StoreDialect;
                use $crate::error::backend;
                use $crate::rows::{to_i32, to_i64};
                let err = backend(Self::BACKEND);
                let id = report.session_id;
                let updated = sqlx::query($crate::sql::SALVAGE_REPORT)
                    .bind(id.as_uuid())
                    .bind(to_i32(report.revision))
                    .bind(report.markdown_key.as_deref())
                    .bind(to_i64(report.markdown_bytes))
                    .bind(report.manifest_key.as_deref())
                    .bind(report.salvaged_from.as_deref())
                    .bind(report.detail.as_deref())
                    .bind(to_i64(report.fence))
                    .execute(&mut *tx)
                    .await
                    .map_err(&err)?;
                if updated.rows_affected() == 0 {
                    return Self::report_unless_present(tx, report).await;
                }
                let row: $crate::rows::ReportRow = sqlx::query_as($crate::sql::SELECT_REPORT)
                    .bind(id.as_uuid())
                    .bind(to_i32(report.revision))
                    .fetch_one_completed(&mut *tx)
                    .await
                    .map_err(&err)?;
                row.into_model(Self::BACKEND)
            }
        }
    };
}

pub(crate) use salvage_rows;
