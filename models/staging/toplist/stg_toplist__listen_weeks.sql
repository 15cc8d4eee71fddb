{#- Counts as stored, without merging, like stg_toplist__listen_buckets and stg_toplist__listen_days. -#}

with

source as (

    select * from {{ source('toplist', 'listens_by_week') }}

),

final as (

    select
        week,
        country,
        song_id,
        finalizeAggregation(listens) as listens
    from source

)

select * from final
